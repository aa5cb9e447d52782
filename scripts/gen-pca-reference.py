#!/usr/bin/env python3
"""Writes tests/fixtures/pca_reference.json: an independent reference (numpy.linalg.eigh, f64) for
focus_core::projection::pca_2d, checked by tests/categories.rs.

Usage: scripts/gen-pca-reference.py [OUT]   (needs numpy)

Input: T = 120 routing-like vectors in d = 16 dimensions with well separated variances along a
random orthonormal frame, plus K = 8 centroids; all values are float32 (as the routing vectors
are) and written with enough digits to be read back exactly. Output: the covariance's
eigenvalues (ddof = 1, descending), explained-variance ratios of the first two, the two axes
(each signed so that its largest-magnitude component is positive), and the tokens' and
centroids' coordinates on them.
"""
import json
import sys

import numpy as np

rng = np.random.default_rng(20261129)
t, d, k = 120, 16, 8
frame, _ = np.linalg.qr(rng.standard_normal((d, d)))
scales = np.geomspace(3.0, 0.05, d)
vectors = (rng.standard_normal((t, d)) * scales) @ frame.T + rng.standard_normal(d)
vectors = vectors.astype(np.float32)
centroids = rng.standard_normal((k, d)).astype(np.float32)

x = vectors.astype(np.float64)
mean = x.mean(axis=0)
cov = np.cov(x, rowvar=False, ddof=1)
values, vecs = np.linalg.eigh(cov)
order = np.argsort(values)[::-1]
values, vecs = values[order], vecs[:, order]
axes = []
for i in range(2):
    v = vecs[:, i]
    lead = int(np.argmax(np.abs(v)))
    axes.append(v if v[lead] > 0 else -v)
axes = np.array(axes)
ref = {
    "t": t, "d": d, "k": k,
    "vectors": [float(v) for v in vectors.ravel()],
    "centroids": [float(v) for v in centroids.ravel()],
    "eigenvalues": values.tolist(),
    "explained": (values[:2] / values.sum()).tolist(),
    "axes": axes.tolist(),
    "points": ((x - mean) @ axes.T).tolist(),
    "centroid_points": ((centroids.astype(np.float64) - mean) @ axes.T).tolist(),
    "generator": "scripts/gen-pca-reference.py, numpy " + np.__version__,
}
out = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/pca_reference.json"
with open(out, "w") as f:
    json.dump(ref, f)
print(f"wrote {out}", file=sys.stderr)
