"""The launcher: `python -m paddlike.launch [options] training_script [args ...]`.

Kept import-light on purpose (no argparse, socket or psutil at package import):
see `paddlike.launch.main` for the flow.
"""
