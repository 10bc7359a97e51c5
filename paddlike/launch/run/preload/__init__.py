"""--preload: workers started as forks of a zygote that imported the script's heavy modules
once (client: the launcher's side; zygote: the process that imports and forks; fresh: in
the fork, the rank's interpreter as a fresh one would be; wire: their messages)."""
