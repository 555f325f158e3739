from compileiq_build.cli import main

raise SystemExit(main())
