"""Everything that touches Label Studio: its REST client, its server and the desks (one server per
person) and their fronts, the settings override and counters it runs with, the reader of its
database, the migration from the old shared server, and the front's page patches and keys script.

The rest of the pipeline speaks to Label Studio only through this package. What we rely on of
Label Studio's internals, the version each piece was written for, its guard and what happens
without it is listed in :mod:`pipeline.labelstudio.internals` (tested; docs/UPGRADING.md is the
guide to moving the pin).
"""
