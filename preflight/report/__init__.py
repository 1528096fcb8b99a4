"""Report writers: preflight.json (the contract), matrix.html (static), and the
pytest-html hooks that add host / check / severity columns and the matrix."""
