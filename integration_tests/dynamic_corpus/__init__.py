"""The dynamic-shapes corpus (issue 33, decisions 0200 and 0210): programs called with many
sizes of one dimension, every call compared with eager, compiles counted."""
