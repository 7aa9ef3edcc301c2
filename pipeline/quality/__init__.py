"""Quality stages: agreement, its reports, adjudication, gold rows."""
