"""acklab's documents as typed values: one builder and one reader each (pydantic models).

The JSON Schemas in ``evidence/schemas/`` stay the published contract; each model here
mirrors one schema object (its ``SCHEMA``) and ``tests/evidence/test_documents.py`` checks
that they agree, both ways. The harness builds documents with these models, the bundle
writer validates what they dump against the schema, and the console, the repair flow, the
merge and the reports read them back with the same models.

=================  =============================  ===================================
document           model (module)                 built by
=================  =============================  ===================================
delivery ...       `Delivery`, `Observation`,     the harness, as a trial runs
                   `CommitConfirmation`,
                   `Violation`, `FaultProof`
                   (`records`)
trial record       `Trial` (`trial`)              the harness (`engine.execute`)
incident           `Incident` (`incident`)        `Incident.build`
run.json           `RunDocument` (`run`)          `RunDocument.build`
``--json``         `RunResultJson` (`result`)     `RunResultJson.of` / `.failed`
comparison.json    `ComparisonDocument`           `ComparisonDocument.build`
sweep.json         `SweepDocument` (`sweep`)      `SweepDocument.build`
trail.json         `TrailDocument` (`trail`)      the repair flow (`flows.trail`)
=================  =============================  ===================================

Latency figures come from one percentile (`latency.percentile`, nearest rank) and
verdicts combine by one precedence (`verdicts.combine`).
"""
