"""Specifications: models, hardware, efficiency profiles and their catalogs."""
