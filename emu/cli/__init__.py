"""The command-line shell: parse, call the library, print, map errors to exit codes."""
