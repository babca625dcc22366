"""Files the tools keep on disk, written so that a crash or a bad byte never loses what was there: YAML
documents (`yamlfile`), SQLite databases (`sqlite_file`), a damaged file kept aside (`aside`), and the one
atomic replace every other file the tools write goes through (`atomic`)."""
