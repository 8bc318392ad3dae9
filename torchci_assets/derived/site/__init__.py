"""The static HUD site: the pages of every domain (HUD grid, Dr. CI, guardians, backends) composed and published."""
