"""System heterogeneity: link reliability, local work, latency models, clocks."""
