"""One module per statistics format, each holding its writer and its reader."""
