"""The shared core: files, names, subprocesses, schemas, the state store and the results bus."""
