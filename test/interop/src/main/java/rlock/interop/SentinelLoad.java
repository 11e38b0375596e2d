/*
 * SentinelLoad: Java threads guarding one Redisson lock behind Redis
 * Sentinel, for test 058, which runs them against SQL sessions guarding
 * the same lock through rlock while the Sentinels fail the primary over.
 *
 * Each critical section is written to the PostgreSQL table
 *
 *     sections (who text, s float8, e float8, port int, token bigint,
 *               kept boolean)
 *
 * where the SQL sessions write theirs too, so that the test can find the
 * sections of either side that overlapped: who is "java"; s and e when
 * the section began and ended, in epoch seconds on this host's clock (as
 * PostgreSQL's clock_timestamp()); port the data node Redisson sent its
 * commands to when it took the lock (0 when that changed while it was
 * taking it); token the fencing token (with --fenced yes), else NULL;
 * kept whether the unlock found the lock still this thread's.  The row is
 * written after the unlock, so that writing it is no part of the section.
 *
 * It speaks the line protocol of Orders.  The one order:
 *
 *   run <key> <threads> <ms>
 *                    <threads> threads take the lock on <key> with a
 *                    wait of 1 s, hold it for 2 ms, unlock it and pause
 *                    5 ms, over and over for <ms> milliseconds.  A failed
 *                    attempt (Redis unreachable, a write refused) is
 *                    counted and tried again 10 ms later.  Answers
 *                    "sections=<n> failures=<n>" and the class of the
 *                    first failure.
 *
 * Options: --sentinels redis://host:port,... and --master name (as
 * useSentinelServers), --password (the data nodes'), --sentinel-password,
 * --jdbc url; --scan-interval ms (SentinelServersConfig.scanInterval:
 * how often Redisson asks the Sentinels for the primary; Redisson's
 * default when not given); --lease ms (the lease of each lock; the
 * watchdog when not given); --fenced yes takes the lock as an
 * RFencedLock, with a token.
 *
 * Copyright (c) 2026, rlock developers
 */
package rlock.interop;

import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.time.Instant;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import org.redisson.Redisson;
import org.redisson.api.RFencedLock;
import org.redisson.api.RLock;
import org.redisson.api.RedissonClient;
import org.redisson.api.redisnode.RedisNodes;
import org.redisson.config.Config;
import org.redisson.config.SentinelServersConfig;

public final class SentinelLoad
{
	private final Map<String, String> opt;
	private final RedissonClient redisson;

	private final AtomicLong sections = new AtomicLong();
	private final AtomicLong failures = new AtomicLong();
	private final AtomicReference<String> firstFailure = new AtomicReference<>();

	private SentinelLoad(Map<String, String> opt)
	{
		this.opt = opt;
		this.redisson = Redisson.create(config(opt));
	}

	public static void main(String[] args) throws Exception
	{
		Map<String, String> opt = new HashMap<>();

		for (int i = 0; i + 1 < args.length; i += 2)
			opt.put(args[i], args[i + 1]);
		SentinelLoad load = new SentinelLoad(opt);

		Orders.serve(Orders.jarVersion(Redisson.class, "org.redisson/redisson"),
					 load::perform, Orders::plainFailure);
		load.redisson.shutdown();
		System.exit(0);
	}

	/* useSentinelServers with the options given; Redisson's defaults else */
	private static Config config(Map<String, String> opt)
	{
		Config config = new Config();
		SentinelServersConfig s = config.useSentinelServers()
			.setMasterName(opt.get("--master"))
			.addSentinelAddress(opt.get("--sentinels").split(","))
			.setPassword(opt.get("--password"))
			.setSentinelPassword(opt.get("--sentinel-password"));

		if (opt.containsKey("--scan-interval"))
			s.setScanInterval(Integer.parseInt(opt.get("--scan-interval")));
		return config;
	}

	private Object perform(String actor, String op, String[] a) throws Exception
	{
		if (!op.equals("run"))
			throw new IllegalArgumentException("unknown order " + op);
		return run(a[0], Integer.parseInt(a[1]), Long.parseLong(a[2]));
	}

	private Object run(String key, int threads, long millis) throws Exception
	{
		long deadline = System.nanoTime() + millis * 1_000_000L;
		List<Thread> workers = new ArrayList<>();

		sections.set(0);
		failures.set(0);
		firstFailure.set(null);
		for (int t = 0; t < threads; t++)
		{
			Thread w = new Thread(() -> loop(key, deadline));

			workers.add(w);
			w.start();
		}
		for (Thread w : workers)
			w.join();
		return "sections=" + sections.get() + " failures=" + failures.get() +
			(firstFailure.get() == null ? "" : " first=" + firstFailure.get());
	}

	/* One thread of run: sections until the deadline */
	private void loop(String key, long deadline)
	{
		boolean fenced = "yes".equals(opt.get("--fenced"));
		long lease = Long.parseLong(opt.getOrDefault("--lease", "-1"));
		RLock lock = fenced ? redisson.getFencedLock(key) : redisson.getLock(key);

		try (Connection db = DriverManager.getConnection(opt.get("--jdbc")))
		{
			PreparedStatement record = db.prepareStatement(
				"INSERT INTO sections VALUES ('java', ?, ?, ?, ?, ?)");

			while (System.nanoTime() < deadline)
			{
				try
				{
					section(lock, fenced, lease, record);
					Thread.sleep(5);
				}
				catch (Exception e)
				{
					failures.incrementAndGet();
					firstFailure.compareAndSet(null, e.getClass().getSimpleName());
					Thread.sleep(10);
				}
			}
		}
		catch (Exception e)
		{
			firstFailure.compareAndSet(null, "jdbc " + e);
		}
	}

	/*
	 * One attempt: take the lock (1 s wait; lease -1: the watchdog), hold
	 * it for 2 ms, unlock, and record the section, kept or not: an unlock
	 * that fails (the lock was no longer this thread's) ends the section
	 * all the same.
	 */
	private void section(RLock lock, boolean fenced, long lease,
						 PreparedStatement record)
		throws Exception
	{
		int before = primaryPort();
		Long token = null;

		if (fenced)
		{
			token = ((RFencedLock) lock).tryLockAndGetToken(1000, lease,
															TimeUnit.MILLISECONDS);
			if (token == null)
				return;
		}
		else if (!lock.tryLock(1000, lease, TimeUnit.MILLISECONDS))
			return;
		Instant s = Instant.now();
		int port = primaryPort() == before ? before : 0;
		boolean kept = false;

		Thread.sleep(2);
		Instant e = Instant.now();

		try
		{
			lock.unlock();
			kept = true;
		}
		finally
		{
			sections.incrementAndGet();
			record.setDouble(1, epoch(s));
			record.setDouble(2, epoch(e));
			record.setInt(3, port);
			if (token == null)
				record.setNull(4, java.sql.Types.BIGINT);
			else
				record.setLong(4, token);
			record.setBoolean(5, kept);
			record.executeUpdate();
		}
	}

	private static double epoch(Instant t)
	{
		return t.getEpochSecond() + t.getNano() / 1e9;
	}

	/* The port of the data node Redisson sends writes to now */
	private int primaryPort()
	{
		return redisson.getRedisNodes(RedisNodes.SENTINEL_MASTER_SLAVE)
			.getMaster().getAddr().getPort();
	}
}
