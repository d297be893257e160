"""The job's own files in its checkpoint go through Hadoop's FileSystem API (any URI Spark takes);
here on the local filesystem, named as a path and as a file:// URI. HDFS and S3: tests/test_hadoop_checkpoint.py."""
from streaming.apps.run import default_log_file, local_checkpoint, skipped_offsets_log
from streaming.spark.checkpoint_folder import CheckpointFolder
from streaming.spark.topology import EARLIER_LAYOUT, earlier_layout


def test_the_query_id_is_one_whatever_names_the_folder(spark, tmp_path):
    folder = tmp_path / "ckpt"
    first = CheckpointFolder(spark, str(folder)).query_id()
    assert (folder / "dirstream-query-id").read_text().strip() == first
    assert CheckpointFolder(spark, f"file://{folder}").query_id() == first
    assert CheckpointFolder(spark, str(tmp_path / "other")).query_id() != first


def test_a_query_id_written_by_earlier_versions_is_read_as_it_is(spark, tmp_path):
    (tmp_path / "dirstream-query-id").write_text("0f1e2d3c-aaaa-bbbb-cccc-000011112222")   # no .crc beside it
    assert CheckpointFolder(spark, str(tmp_path)).query_id() == "0f1e2d3c-aaaa-bbbb-cccc-000011112222"


def test_the_earlier_layout_is_found_through_spark_as_without_it(spark, tmp_path):
    assert earlier_layout(str(tmp_path), spark) is None and earlier_layout(str(tmp_path)) is None
    (tmp_path / EARLIER_LAYOUT[0]).mkdir()
    through_spark = earlier_layout(f"file://{tmp_path}", spark)
    assert through_spark and EARLIER_LAYOUT[0] in through_spark
    assert earlier_layout(str(tmp_path)) == earlier_layout(str(tmp_path), spark)


def test_a_remote_checkpoint_keeps_the_log_and_skip_log_in_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert local_checkpoint("hdfs://nn:8020/dirstream/ckpt") is None
    assert local_checkpoint("file:///var/lib/dirstream/ckpt") == "/var/lib/dirstream/ckpt"
    assert default_log_file("s3a://bucket/ckpt") == str(tmp_path / "dirstream-run.log")
    assert skipped_offsets_log("s3a://bucket/ckpt") == str(tmp_path / "dirstream-raw-skipped-offsets.jsonl")
    assert default_log_file("/var/lib/dirstream/ckpt") == "/var/lib/dirstream/dirstream-run.log"
    assert skipped_offsets_log("var/ckpt") == "var/ckpt/raw-skipped-offsets.jsonl"
