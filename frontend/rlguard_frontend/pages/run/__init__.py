"""The run page: its layout and callbacks, data and live updates."""
