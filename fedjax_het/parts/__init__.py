"""Parts: kinds of heterogeneity a method runs under, composed into it (held
as an object its hooks delegate to), not inherited from another method."""
