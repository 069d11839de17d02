"""Model families: everything model-specific, nothing about serving."""
