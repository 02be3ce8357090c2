"""The paper's metrics, on the miniature: nuisance and label predictability, and generation quality.

* Nuisance predictability (lower is better; chance 0.25): accuracy of predicting the light S from
  the representation of a test image, by logistic regression and by a random forest fitted on
  the training representations (the paper's Extended Yale B protocol).
* Label accuracy with few labels (higher is better): logistic regression fitted on the
  representations of the labelled training images only, scored on the test images.
* Conditional generation: a judge (logistic regressions fitted on real lit training images with
  all labels, an evaluation instrument only) reads the digit and the light of images decoded from
  prior samples with a chosen digit and light, and of test images relit to another light.
"""

from __future__ import annotations

import numpy as np
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from testbed.workloads.strwae.data import LitDigits

FOREST_TREES = 60


def linear_probe(features: np.ndarray, labels: np.ndarray) -> LogisticRegression:
    """Standardised multinomial logistic regression (deterministic lbfgs)."""
    return make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000)).fit(features, labels)


def probe_accuracies(train_features: np.ndarray, test_features: np.ndarray, train: LitDigits, test: LitDigits,
                     seed: int) -> dict[str, float]:
    """Light from the representation (LR and RF, all training images) and digit from it (LR, labelled only)."""
    forest = RandomForestClassifier(FOREST_TREES, min_samples_leaf=2, random_state=seed, n_jobs=1)
    forest.fit(train_features, train.s)
    labelled = train.labelled
    return {
        "nuisance_accuracy_lr": float(linear_probe(train_features, train.s).score(test_features, test.s)),
        "nuisance_accuracy_rf": float(forest.score(test_features, test.s)),
        "label_accuracy": float(linear_probe(train_features[labelled], train.y[labelled]).score(test_features, test.y)),
    }


class Judge:
    """Digit and light classifiers on real images, fitted once, that score decoded images."""

    def __init__(self, train: LitDigits):
        self.digit = LogisticRegression(max_iter=2000).fit(train.x, train.y)
        self.light = LogisticRegression(max_iter=2000).fit(train.x, train.s)

    def digit_accuracy(self, images: np.ndarray, digits: np.ndarray) -> float:
        """Share of ``images`` read as the intended ``digits``."""
        return float(self.digit.score(images, digits))

    def light_accuracy(self, images: np.ndarray, lights: np.ndarray) -> float:
        """Share of ``images`` read as lit by the intended ``lights``."""
        return float(self.light.score(images, lights))
