from sglpatch.cli import main

raise SystemExit(main())
