"""`python -m fusionlab ...`: the same as the `fusionlab` command (see fusionlab.cli)."""

from fusionlab.cli import main

raise SystemExit(main())
