"""The tiny GRPO/PPO trainer behind ``rlguard demo``: real runs that show each stability failure.

Needs torch (``pip install 'rlguard[torch]'``); ``import rlguard`` never imports this package.
"""

from rlguard.demo.presets import ALL, PRESETS, PresetConfig
from rlguard.demo.trainer import TrainResult, train

__all__ = ["ALL", "PRESETS", "PresetConfig", "TrainResult", "train"]
