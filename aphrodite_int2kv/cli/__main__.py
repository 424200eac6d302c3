import sys

from aphrodite_int2kv.cli import main

sys.exit(main())
