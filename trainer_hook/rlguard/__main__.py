from rlguard.cli import main

raise SystemExit(main())
