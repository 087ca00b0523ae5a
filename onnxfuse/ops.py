"""Op schemas of the onnxfuse domain (being written by the functions helper)."""

DOMAIN = "onnxfuse"
VERSION = 1
