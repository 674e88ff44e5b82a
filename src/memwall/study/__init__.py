"""Which cases the science needs, as data: the default study, its tables and the validation judge."""
