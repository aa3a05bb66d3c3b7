"""ember.codegen: lowers a kernel AST to a rendered program (opts, lower, linearize, render)."""

__version__ = "0.0.1"
