"""Quality stages: agreement, its reports and gates, adjudication, gold rows.

Inside, modules import downward only: ``coefficients`` (alpha, kappa, MASI) <- ``coding`` (label
table -> coded matrices) <- ``measures`` (a round's figures) <- ``reports`` / ``gates`` <-
``agreement`` (the round's measure stage); ``disagreements`` (what needs an adjudicator) <-
``gold`` and ``adjudication``.
"""
