"""The trainspec conformance kit."""
