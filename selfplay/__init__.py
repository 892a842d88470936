"""π-Play self-play (examiner, teacher, student, question construction paths, rewards) and
active label acquisition (majority-vote pseudo-labels, CAG, CARE, strategies, budget).
"""
