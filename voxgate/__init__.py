"""Voxgate's client-side packages (the server lives in gateway/, engine/ and models/)."""
