"""`python -m fedjax_het` is the `fedjax-het` command."""
import sys

from fedjax_het.cli import main

if __name__ == '__main__':
  sys.exit(main())
