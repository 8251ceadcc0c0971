"""The ground floor: error types, the console, the pure-Python grid simulator. Imports nothing first-party."""
