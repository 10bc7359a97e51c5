"""Scripts the parameter-server tests run as servers and trainers, and a small spawner."""
