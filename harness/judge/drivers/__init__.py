"""Drivers: one per pool family; operations as data, judged against the shadow model."""
