"""The data kvenv reasons about: the profile and its loading, the host snapshot, the target
environment, the runtime paths, the JSON Schemas."""
