"""Writes patients.csv, the README's example table: 1,200 synthetic patients of six hospitals.

Each hospital has its own mix of wards and its own age profile (non-IID by construction); the
outcome follows a logistic model of the measurements. Run it once (`python make_patients.py`);
the committed CSV is its output for seed 0.
"""

import csv
from pathlib import Path

import numpy as np

rng = np.random.default_rng(0)
rows = []
for hospital in range(6):
    wards = rng.dirichlet([0.6, 0.6, 0.6])
    for _ in range(200):
        ward = "ABC"[rng.choice(3, p=wards)]
        age = rng.normal(45 + 5 * hospital, 12)
        bp, chol, bmi = rng.normal(125, 15), rng.normal(200, 35), rng.normal(27, 4)
        glucose, hr = rng.normal(100, 20), rng.normal(75, 10)
        score = 0.04 * (age - 60) + 0.03 * (bp - 125) + 0.02 * (glucose - 100) + 0.1 * (bmi - 27) + \
            {"A": -0.5, "B": 0.0, "C": 0.8}[ward]
        outcome = int(rng.random() < 1 / (1 + np.exp(-score)))
        rows.append([f"h{hospital}", ward, *(round(float(v), 1) for v in (age, bp, chol, bmi, glucose, hr)), outcome])
with open(Path(__file__).with_name("patients.csv"), "w", newline="") as handle:
    writer = csv.writer(handle)
    writer.writerow(["hospital", "ward", "age", "bp", "chol", "bmi", "glucose", "hr", "outcome"])
    writer.writerows(rows)
