"""The job as a Spark application, for spark-submit: its arguments are `dirstream run`'s, and the
master is the one spark-submit was given (--master, or spark-defaults.conf).

    spark-submit --master spark://spark-master:7077 --py-files msmq_dirstream-0.1.0-py3-none-any.whl \\
        "$(dirstream spark-main)" --bootstrap kafka1:9092 --sink postgresql://dirstream@db/msmq \\
        --checkpoint /mnt/dirstream/checkpoint --pec-name PEC01

`dirstream spark-main` prints this file's path. The driver runs where spark-submit runs (client
mode: Spark's standalone clusters run Python applications only so), in the Python that
spark-submit starts (PYSPARK_DRIVER_PYTHON or PYSPARK_PYTHON), which must have the project
installed or the wheel on --py-files; the executors get the project's code from the job itself.
"""
import sys

__all__ = ["main"]


def submitted_master() -> str:
    """spark.master as spark-submit set it, read from the JVM spark-submit started."""
    from pyspark import SparkConf
    from pyspark.core.context import SparkContext
    SparkContext._ensure_initialized()          # the gateway of the JVM that spark-submit started
    return SparkConf().get("spark.master", "local[*]")


def main(argv: list[str]) -> int:
    if "--master" in argv or any(a.startswith("--master=") for a in argv):
        print("dirstream spark-main: give the master to spark-submit (--master), not to the job", file=sys.stderr)
        return 2
    from streaming.apps.cli import main as dirstream
    return dirstream(["run", "--master", submitted_master(), *argv])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
