"""Plan formats: records, their JSON forms and JSON Schemas."""
