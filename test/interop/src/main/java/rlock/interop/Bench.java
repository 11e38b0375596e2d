/*
 * Bench: the peer benchmark.  One read-then-write transaction on a counter
 * row, run from Java through a JDBC connection pool (HikariCP), guarded
 * four ways:
 *
 *   rlock       BEGIN; SELECT rlock_lock(key); read; write; COMMIT
 *               (the lock is released by the transaction's end)
 *   rlock-lease the same with rlock.verify_at_commit = lease: the commit
 *               trusts the lease instead of asking Redis
 *   redisson    lock(); BEGIN; read; write; COMMIT; unlock()
 *   early       BEGIN; lock(); read; write; unlock(); COMMIT: the lock of a
 *               @Transactional method released in its finally block, before
 *               the commit the framework issues after it
 *   none        BEGIN; read; write; COMMIT
 *
 * at each thread count, on random keys (one counter row and lock per key)
 * and on one hot key.  Each cell warms up for a second, resets the
 * counters, then runs for the given time; it reports throughput, latency
 * of the whole guarded section (p50, p99) and the updates lost: commits
 * counted by the threads minus the sum of the counters.
 *
 * Options: --jdbc url, --redis redis://host:port, --seconds s, --threads
 * "1 16 64", --keys n (rows for the random keys), --modes "rlock ...",
 * --data file (one line per cell, for the plot).  The table goes to
 * standard output.
 *
 * Copyright (c) 2026, rlock developers
 */
package rlock.interop;

import java.io.PrintWriter;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.atomic.AtomicBoolean;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import org.redisson.Redisson;
import org.redisson.api.RLock;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;

public final class Bench
{
	private final String jdbcUrl;
	private final RedissonClient redisson;
	private final int keys;

	private Bench(String jdbcUrl, String redisAddress, int keys)
	{
		Config config = new Config();

		config.useSingleServer().setAddress(redisAddress)
			.setConnectionPoolSize(64).setConnectionMinimumIdleSize(16);
		this.jdbcUrl = jdbcUrl;
		this.redisson = Redisson.create(config);
		this.keys = keys;
	}

	/* What one thread saw */
	private static final class Tally
	{
		long		commits;
		long		errors;
		String		firstError;
		long[]		latencyNs = new long[1 << 16];
		int			n;

		void add(long ns)
		{
			if (n == latencyNs.length)
				latencyNs = Arrays.copyOf(latencyNs, n * 2);
			latencyNs[n++] = ns;
		}
	}

	public static void main(String[] args) throws Exception
	{
		Map<String, String> opt = new HashMap<>();

		for (int i = 0; i + 1 < args.length; i += 2)
			opt.put(args[i], args[i + 1]);

		int seconds = Integer.parseInt(opt.getOrDefault("--seconds", "10"));
		int[] threads = Arrays.stream(opt.getOrDefault("--threads", "1 16 64").trim().split(" +"))
			.mapToInt(Integer::parseInt).toArray();
		String[] modes = opt.getOrDefault("--modes", "rlock rlock-lease redisson early none").trim().split(" +");
		Bench b = new Bench(opt.get("--jdbc"), opt.getOrDefault("--redis", "redis://127.0.0.1:6379"),
							Integer.parseInt(opt.getOrDefault("--keys", "10000")));
		PrintWriter data = opt.containsKey("--data") ?
			new PrintWriter(opt.get("--data"), "UTF-8") : null;

		b.setUp();
		System.out.printf("%-6s | %7s | %-11s | %9s %8s %8s | %9s %9s%n",
						  "keys", "threads", "lock", "tps", "p50 ms", "p99 ms", "commits", "lost");
		if (data != null)
			data.println("# keys threads lock tps p50_ms p99_ms commits lost errors");
		for (boolean hot : new boolean[] {false, true})
		{
			for (int t : threads)
			{
				for (String mode : modes)
				{
					long[] r = b.cell(mode, hot, t, seconds);
					double tps = r[0] / (double) seconds;
					String line = String.format("%-6s | %7d | %-11s | %9.0f %8.2f %8.2f | %9d %9d%s",
												hot ? "hot" : "random", t, mode, tps,
												r[2] / 1e6, r[3] / 1e6, r[0], r[1],
												r[4] > 0 ? "  (" + r[4] + " errors)" : "");

					System.out.println(line);
					System.out.flush();
					if (data != null)
						data.printf("%s %d %s %.0f %.3f %.3f %d %d %d%n",
									hot ? "hot" : "random", t, mode, tps,
									r[2] / 1e6, r[3] / 1e6, r[0], r[1], r[4]);
				}
			}
		}
		if (data != null)
			data.close();
		b.redisson.shutdown();
	}

	private void setUp() throws SQLException
	{
		try (Connection c = java.sql.DriverManager.getConnection(jdbcUrl);
			 Statement s = c.createStatement())
		{
			s.execute("DROP TABLE IF EXISTS peer_counters");
			s.execute("CREATE TABLE peer_counters (k int PRIMARY KEY, n bigint NOT NULL)");
			s.execute("INSERT INTO peer_counters SELECT g, 0 FROM generate_series(0, " + keys + ") g");
			s.execute("VACUUM ANALYZE peer_counters");
		}
	}

	/*
	 * One cell, with a pool of its own: a second of warm-up, then the
	 * measured run.  Returns {commits, lost, p50 ns, p99 ns, errors}.
	 */
	private long[] cell(String mode, boolean hot, int nthreads, int seconds) throws Exception
	{
		HikariConfig hc = new HikariConfig();

		hc.setJdbcUrl(jdbcUrl);
		hc.setMaximumPoolSize(nthreads);
		hc.setMinimumIdle(nthreads);
		hc.setAutoCommit(false);
		if (mode.equals("rlock-lease"))
			hc.setConnectionInitSql("SET rlock.verify_at_commit = lease");
		try (HikariDataSource pool = new HikariDataSource(hc))
		{
			run(pool, mode, hot, nthreads, 1);
			return run(pool, mode, hot, nthreads, seconds);
		}
	}

	private long[] run(HikariDataSource pool, String mode, boolean hot, int nthreads,
					   int seconds) throws Exception
	{
		try (Connection c = pool.getConnection(); Statement s = c.createStatement())
		{
			s.execute("UPDATE peer_counters SET n = 0 WHERE n <> 0");
			c.commit();
		}

		AtomicBoolean stop = new AtomicBoolean();
		List<Thread> workers = new ArrayList<>();
		List<Tally> tallies = new ArrayList<>();

		for (int i = 0; i < nthreads; i++)
		{
			Tally tally = new Tally();
			Thread w = new Thread(() -> {
				while (!stop.get())
				{
					int k = hot ? 0 : 1 + ThreadLocalRandom.current().nextInt(keys);
					long t0 = System.nanoTime();

					try
					{
						once(pool, mode, k);
						tally.commits++;
						tally.add(System.nanoTime() - t0);
					}
					catch (Exception e)
					{
						if (tally.errors++ == 0)
							tally.firstError = e.toString();
					}
				}
			});

			tallies.add(tally);
			workers.add(w);
		}
		for (Thread w : workers)
			w.start();
		Thread.sleep(seconds * 1000L);
		stop.set(true);
		for (Thread w : workers)
			w.join();

		long commits = 0, errors = 0, sum;
		int n = 0;

		for (Tally t : tallies)
		{
			commits += t.commits;
			errors += t.errors;
			n += t.n;
			if (t.firstError != null)
				System.err.println(mode + ": " + t.firstError);
		}
		long[] all = new long[n];
		int at = 0;

		for (Tally t : tallies)
		{
			System.arraycopy(t.latencyNs, 0, all, at, t.n);
			at += t.n;
		}
		Arrays.sort(all);
		try (Connection c = pool.getConnection(); Statement s = c.createStatement();
			 ResultSet r = s.executeQuery("SELECT sum(n) FROM peer_counters"))
		{
			r.next();
			sum = r.getLong(1);
			c.commit();
		}
		return new long[] {commits, commits - sum,
			n > 0 ? all[(int) (0.50 * (n - 1))] : 0,
			n > 0 ? all[(int) (0.99 * (n - 1))] : 0, errors};
	}

	/* The body of a transaction */
	private interface Work
	{
		void run(Connection c) throws SQLException;
	}

	/* A transaction on a pooled connection: the work, then COMMIT */
	private static void transaction(HikariDataSource pool, Work work) throws SQLException
	{
		try (Connection c = pool.getConnection())
		{
			try
			{
				work.run(c);
				c.commit();
			}
			catch (SQLException e)
			{
				c.rollback();
				throw e;
			}
		}
	}

	/* The guarded transaction, as each mode runs it */
	private void once(HikariDataSource pool, String mode, int k) throws Exception
	{
		RLock l = redisson.getLock("peer:" + k);

		switch (mode)
		{
			case "rlock":
			case "rlock-lease":
				transaction(pool, c -> {
					try (PreparedStatement lock = c.prepareStatement("SELECT rlock_lock(?)"))
					{
						lock.setString(1, "peer:" + k);
						lock.executeQuery().close();
					}
					readWrite(c, k);
				});
				break;
			case "redisson":
				l.lock();
				try
				{
					transaction(pool, c -> readWrite(c, k));
				}
				finally
				{
					l.unlock();
				}
				break;
			case "early":
				/* the unlock runs inside the transaction, before its commit */
				transaction(pool, c -> {
					l.lock();
					try
					{
						readWrite(c, k);
					}
					finally
					{
						l.unlock();
					}
				});
				break;
			case "none":
				transaction(pool, c -> readWrite(c, k));
				break;
			default:
				throw new IllegalArgumentException("unknown lock mode " + mode);
		}
	}

	/* Read the counter, then write it back plus one: a lost update unless guarded */
	private static void readWrite(Connection c, int k) throws SQLException
	{
		long n;

		try (PreparedStatement read = c.prepareStatement("SELECT n FROM peer_counters WHERE k = ?"))
		{
			read.setInt(1, k);
			try (ResultSet r = read.executeQuery())
			{
				r.next();
				n = r.getLong(1);
			}
		}
		try (PreparedStatement write = c.prepareStatement("UPDATE peer_counters SET n = ? WHERE k = ?"))
		{
			write.setLong(1, n + 1);
			write.setInt(2, k);
			write.executeUpdate();
		}
	}
}
