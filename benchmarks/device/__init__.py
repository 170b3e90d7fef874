"""The prepared GPU device check (``device_check.sh``) and its stages."""
