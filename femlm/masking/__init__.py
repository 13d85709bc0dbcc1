"""masking."""
