"""Training: losses (GRPO, HRPO, reverse-KL distillation, CARE weighting), the rollout engine,
the trainer loop with atomic checkpoints, SFT, and exporters to verl and TRL formats.
"""
