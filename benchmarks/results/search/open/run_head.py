"""Run benchmarks.open_eval of a `git archive` (its folder the first argument), not the editable
install's package: python run_head.py ARCHIVE_DIR [open_eval arguments]."""
import sys

sys.meta_path = [f for f in sys.meta_path if not type(f).__module__.startswith("_editable_skbc")]
sys.path.insert(0, sys.argv.pop(1))
from benchmarks import open_eval  # noqa: E402

sys.exit(open_eval.main(sys.argv[1:]))
