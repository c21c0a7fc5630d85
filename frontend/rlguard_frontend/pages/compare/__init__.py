"""The compare page: its layout and callbacks, data, figures, state and tables."""
