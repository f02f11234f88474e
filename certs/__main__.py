from certs.cli import main

raise SystemExit(main())
