import sys

from ember.mlperf_llama.cli import main

sys.exit(main())
