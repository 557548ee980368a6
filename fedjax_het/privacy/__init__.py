"""Privacy accounting on the host (`privacy.accounting`, the `[dp]` extra)."""
