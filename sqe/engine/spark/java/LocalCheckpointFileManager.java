/*
 * SQE on Spark: Spark's checkpoint file manager for a checkpoint on this machine's disk.
 *
 * Spark writes two files per micro-batch into a streaming query's checkpoint (its offsets and
 * its commit), each as a temporary file renamed into place.  Through Hadoop's local file system
 * (FileSystemBasedCheckpointFileManager), a new file's permission is set by running `chmod` in a
 * child process whenever Hadoop's native library is absent, as it is in pip's pyspark: two
 * processes started by the driver's JVM in every micro-batch, some 15 ms each on 2 cores.  This
 * manager creates the temporary file with Java's own file API instead (its permission is the
 * process's umask, as for any file the JVM writes); the rename, the reads, listing and deleting
 * stay Spark's.  Paths on any other file system are handed to Spark's manager unchanged.
 *
 * Built into sqe-spark.jar by tools/build_jar.py; sqe.engine.spark.checkpoint puts it in charge of a
 * local run's checkpoint when the jar is on the driver's class path.
 */
package sqe.spark;

import java.io.IOException;
import java.io.OutputStream;
import java.nio.file.Files;
import java.nio.file.StandardOpenOption;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager;

public final class LocalCheckpointFileManager extends FileSystemBasedCheckpointFileManager {

  public LocalCheckpointFileManager(Path path, Configuration hadoopConf) {
    super(path, hadoopConf);
  }

  @Override
  public FSDataOutputStream createTempFile(Path path) {
    FileSystem fs = fs();
    java.io.File file;
    if (fs instanceof LocalFileSystem) {
      file = ((LocalFileSystem) fs).pathToFile(path);
    } else if (fs instanceof RawLocalFileSystem) {
      file = ((RawLocalFileSystem) fs).pathToFile(path);
    } else {
      return super.createTempFile(path);
    }
    try {
      Files.createDirectories(file.toPath().getParent());  // as Hadoop's create does
      OutputStream out = Files.newOutputStream(file.toPath(), StandardOpenOption.CREATE,
          StandardOpenOption.TRUNCATE_EXISTING, StandardOpenOption.WRITE);
      return new FSDataOutputStream(out, null);
    } catch (IOException e) {
      throw LocalCheckpointFileManager.<RuntimeException>unchecked(e);
    }
  }

  /** Throws ``e`` as it is (Scala's method declares no exception; its callers catch it). */
  @SuppressWarnings("unchecked")
  private static <E extends Throwable> E unchecked(Throwable e) throws E {
    throw (E) e;
  }
}
