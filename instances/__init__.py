"""The instance files shipped with memplan (package data): ``memplan.load_instance(NAME)`` finds them by name."""
