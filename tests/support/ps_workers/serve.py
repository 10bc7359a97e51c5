"""A PS job script that only serves (the tests play the trainers themselves)."""

from paddlike.distributed import ps

if __name__ == "__main__":
    ps.init()
    ps.run_server()
