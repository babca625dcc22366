"""`python -m ernie_ops`: the unit's ExecStart uses this form so it never depends on a script shebang."""

from ernie_ops.cli import main

raise SystemExit(main())
