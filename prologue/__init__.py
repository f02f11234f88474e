"""The shell prologue every trainer container runs before the user's command.

The text lives in ``dispatch-prologue.sh`` beside this file and nowhere else; ``contract.prologue`` embeds
it in the TrainJob's command.
"""
