"""Wireless channels as jitted pure functions (AirComp over-the-air aggregation)."""
