/*
 * Driver: a Java service taking Redisson locks on orders, for rlock's
 * interoperability tests.
 *
 * It speaks the line protocol of Orders: one order per line, one answer
 * per order when it is done.
 *
 * An actor "c.t" is thread t of Redisson client c: every client is its
 * own RedissonClient (its own id, as a separate JVM would have), every
 * thread a thread of its own, since Redisson locks belong to a thread.
 * Options: --redis redis://host:port, --codec default|string (the codec
 * the clients are configured with), --watchdog ms (lockWatchdogTimeout),
 * --jdbc url (for "stress" and "rwstress").  With --sentinel name the
 * clients find the primary of that name through the Sentinels --redis
 * lists, comma separated, as useSentinelServers does; --password is the
 * data nodes' password and --sentinel-password the Sentinels'.  With
 * --cluster yes the clients use the Redis Cluster whose nodes --redis
 * lists, comma separated, as useClusterServers does; --sharded off sets
 * shardedSubscriptionMode OFF (Redisson 3.29 and later) for classic
 * pub/sub.
 *
 * Copyright (c) 2026, rlock developers
 */
package rlock.interop;

import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;

import org.redisson.Redisson;
import org.redisson.api.RCountDownLatch;
import org.redisson.api.RFencedLock;
import org.redisson.api.RLock;
import org.redisson.api.RPermitExpirableSemaphore;
import org.redisson.api.RSemaphore;
import org.redisson.api.RedissonClient;
import org.redisson.client.codec.StringCodec;
import org.redisson.config.ClusterServersConfig;
import org.redisson.config.Config;

public final class Driver
{
	private final String redisAddress;
	private final String codec;
	private final long watchdogMs;
	private final String jdbcUrl;
	/* the Sentinels' name for the primary, or null: one server */
	private String sentinelMaster;
	private String password;
	private String sentinelPassword;
	private boolean cluster;
	private boolean shardedOff;

	private final Map<String, RedissonClient> clients = new ConcurrentHashMap<>();
	/* one lock object per actor and key: it remembers its lease for unlocks */
	private final Map<String, RLock> locks = new ConcurrentHashMap<>();

	private Driver(String redisAddress, String codec, long watchdogMs,
				   String jdbcUrl)
	{
		this.redisAddress = redisAddress;
		this.codec = codec;
		this.watchdogMs = watchdogMs;
		this.jdbcUrl = jdbcUrl;
	}

	public static void main(String[] args) throws Exception
	{
		String redis = "redis://127.0.0.1:6379";
		String codec = "default";
		long watchdog = 30000;
		String jdbc = null;
		String sentinel = null;
		String password = null;
		String sentinelPassword = null;
		boolean cluster = false;
		boolean shardedOff = false;

		for (int i = 0; i + 1 < args.length; i += 2)
		{
			switch (args[i])
			{
				case "--redis" -> redis = args[i + 1];
				case "--codec" -> codec = args[i + 1];
				case "--watchdog" -> watchdog = Long.parseLong(args[i + 1]);
				case "--jdbc" -> jdbc = args[i + 1];
				case "--sentinel" -> sentinel = args[i + 1];
				case "--password" -> password = args[i + 1];
				case "--sentinel-password" -> sentinelPassword = args[i + 1];
				case "--cluster" -> cluster = args[i + 1].equals("yes");
				case "--sharded" -> shardedOff = args[i + 1].equals("off");
				default -> throw new IllegalArgumentException("unknown option " + args[i]);
			}
		}
		Driver d = new Driver(redis, codec, watchdog, jdbc);

		d.sentinelMaster = sentinel;
		d.password = password;
		d.sentinelPassword = sentinelPassword;
		d.cluster = cluster;
		d.shardedOff = shardedOff;
		d.run();
	}

	private void run() throws Exception
	{
		Orders.serve(Orders.jarVersion(Redisson.class, "org.redisson/redisson"),
					 this::perform, Orders::plainFailure);
		for (RedissonClient c : clients.values())
			c.shutdown();
		System.exit(0);
	}

	private RedissonClient client(String actor)
	{
		String name = actor.contains(".") ? actor.substring(0, actor.indexOf('.')) : actor;

		return clients.computeIfAbsent(name, k -> {
			Config config = new Config();

			if (cluster)
			{
				ClusterServersConfig c = config.useClusterServers()
					.addNodeAddress(redisAddress.split(","))
					.setPassword(password);

				if (shardedOff)
					shardedSubscriptionOff(c);
			}
			else if (sentinelMaster == null)
				config.useSingleServer().setAddress(redisAddress)
					.setPassword(password);
			else
				config.useSentinelServers()
					.setMasterName(sentinelMaster)
					.addSentinelAddress(redisAddress.split(","))
					.setPassword(password)
					.setSentinelPassword(sentinelPassword);
			config.setLockWatchdogTimeout(watchdogMs);
			if (codec.equals("string"))
				config.setCodec(StringCodec.INSTANCE);
			return Redisson.create(config);
		});
	}

	/*
	 * shardedSubscriptionMode OFF, by name: older Redisson versions have no
	 * such setting, and fail here.
	 */
	private static void shardedSubscriptionOff(ClusterServersConfig c)
	{
		try
		{
			Class<?> mode = Class.forName("org.redisson.config.ShardedSubscriptionMode");
			Object off = mode.getField("OFF").get(null);

			c.getClass().getMethod("setShardedSubscriptionMode", mode).invoke(c, off);
		}
		catch (ReflectiveOperationException e)
		{
			throw new IllegalStateException("this Redisson has no shardedSubscriptionMode", e);
		}
	}

	private RLock lock(String actor, String key)
	{
		return lock(actor, "plain", key);
	}

	/*
	 * The lock object of an actor for a key, of a kind: "plain" (getLock),
	 * "read" and "write" (the two halves of getReadWriteLock), "fair"
	 * (getFairLock), "spin" (getSpinLock), "multi" (getMultiLock over a
	 * getLock of each name in key, comma separated).
	 */
	private RLock lock(String actor, String kind, String key)
	{
		return locks.computeIfAbsent(actor + "\u0000" + kind + "\u0000" + key, k -> {
			RedissonClient c = client(actor);

			switch (kind)
			{
				case "plain":
					return c.getLock(key);
				case "read":
					return c.getReadWriteLock(key).readLock();
				case "write":
					return c.getReadWriteLock(key).writeLock();
				case "fair":
					return c.getFairLock(key);
				case "spin":
					return c.getSpinLock(key);
				case "multi":
					{
						String[] names = key.split(",");
						RLock[] members = new RLock[names.length];

						for (int i = 0; i < names.length; i++)
							members[i] = c.getLock(names[i]);
						return c.getMultiLock(members);
					}
				default:
					throw new IllegalArgumentException("unknown lock kind " + kind);
			}
		});
	}

	private RFencedLock fenced(String actor, String key)
	{
		return (RFencedLock) locks.computeIfAbsent(actor + "\u0001" + key,
												   k -> client(actor).getFencedLock(key));
	}

	/*
	 * "sem.<op>": an RSemaphore named a[0].  trysetpermits n; acquire [n]
	 * (waits without a bound, as Redisson's acquire does); tryacquire
	 * waitMs, or tryacquire n waitMs; release [n]; available; addpermits
	 * delta.
	 */
	private Object semaphore(String actor, String op, String[] a) throws Exception
	{
		RSemaphore sem = client(actor).getSemaphore(a[0]);

		switch (op)
		{
			case "trysetpermits":
				return sem.trySetPermits(Integer.parseInt(a[1]));
			case "acquire":
				sem.acquire(a.length > 1 ? Integer.parseInt(a[1]) : 1);
				return "done";
			case "tryacquire":
				if (a.length > 2)
					return sem.tryAcquire(Integer.parseInt(a[1]), Long.parseLong(a[2]),
										  TimeUnit.MILLISECONDS);
				return sem.tryAcquire(Long.parseLong(a[1]), TimeUnit.MILLISECONDS);
			case "release":
				sem.release(a.length > 1 ? Integer.parseInt(a[1]) : 1);
				return "done";
			case "available":
				return sem.availablePermits();
			case "addpermits":
				sem.addPermits(Integer.parseInt(a[1]));
				return "done";
			default:
				throw new IllegalArgumentException("unknown order sem." + op);
		}
	}

	/*
	 * Permit ids as the answer of an order: comma separated, or "false"
	 * when there are none (a try that gave up).
	 */
	private static String permitIds(List<String> ids)
	{
		if (ids == null || ids.isEmpty())
			return "false";
		return String.join(",", ids);
	}

	/*
	 * "pes.<op>": an RPermitExpirableSemaphore named a[0].  A lease of 0
	 * ms or less means none: the permit never expires.
	 *
	 *	trysetpermits n
	 *	acquire [n [leaseMs]]		waits without a bound; answers the ids
	 *	tryacquire n waitMs leaseMs	the ids, or "false"
	 *	release id[,id...]			Redisson's release: throws for an id
	 *								that is gone
	 *	tryrelease id				true or false
	 *	available					availablePermits (which reclaims
	 *								expired permits first)
	 *	acquired					acquiredPermits
	 *	addpermits delta
	 *	updatelease id leaseMs		true or false
	 *
	 * The single-permit calls are used for one permit, so that Redisson
	 * 3.23's single-id scripts are what runs there too.
	 */
	private Object permitSemaphore(String actor, String op, String[] a) throws Exception
	{
		RPermitExpirableSemaphore sem =
			client(actor).getPermitExpirableSemaphore(a[0]);
		TimeUnit ms = TimeUnit.MILLISECONDS;

		switch (op)
		{
			case "trysetpermits":
				return sem.trySetPermits(Integer.parseInt(a[1]));
			case "acquire":
				{
					int n = a.length > 1 ? Integer.parseInt(a[1]) : 1;
					long lease = a.length > 2 ? Long.parseLong(a[2]) : 0;

					if (n == 1)
						return lease > 0 ? sem.acquire(lease, ms) : sem.acquire();
					return permitIds(lease > 0 ? sem.acquire(n, lease, ms)
									 : sem.acquire(n));
				}
			case "tryacquire":
				{
					int n = Integer.parseInt(a[1]);
					long wait = Long.parseLong(a[2]);
					long lease = Long.parseLong(a[3]);

					if (n == 1)
					{
						String id = lease > 0 ? sem.tryAcquire(wait, lease, ms)
							: sem.tryAcquire(wait, ms);

						return id == null ? "false" : id;
					}
					return permitIds(sem.tryAcquire(n, wait, lease > 0 ? lease : -1, ms));
				}
			case "release":
				{
					List<String> ids = List.of(a[1].split(","));

					if (ids.size() == 1)
						sem.release(ids.get(0));
					else
						sem.release(ids);
					return "done";
				}
			case "tryrelease":
				return sem.tryRelease(a[1]);
			case "available":
				return sem.availablePermits();
			case "acquired":
				return sem.acquiredPermits();
			case "addpermits":
				sem.addPermits(Integer.parseInt(a[1]));
				return "done";
			case "updatelease":
				return sem.updateLeaseTime(a[1], Long.parseLong(a[2]), ms);
			default:
				throw new IllegalArgumentException("unknown order pes." + op);
		}
	}

	/*
	 * "latch.<op>": an RCountDownLatch named a[0].  trysetcount n;
	 * countdown; count; await [ms] (without ms Redisson's await() with no
	 * bound, answering "done"; with ms true or false); delete.
	 */
	private Object latch(String actor, String op, String[] a) throws Exception
	{
		RCountDownLatch latch = client(actor).getCountDownLatch(a[0]);

		switch (op)
		{
			case "trysetcount":
				return latch.trySetCount(Long.parseLong(a[1]));
			case "countdown":
				latch.countDown();
				return "done";
			case "count":
				return latch.getCount();
			case "await":
				if (a.length > 1)
					return latch.await(Long.parseLong(a[1]), TimeUnit.MILLISECONDS);
				latch.await();
				return "done";
			case "delete":
				return latch.delete();
			default:
				throw new IllegalArgumentException("unknown order latch." + op);
		}
	}

	private Object perform(String actor, String op, String[] a) throws Exception
	{
		if (op.startsWith("sem."))
			return semaphore(actor, op.substring(4), a);
		if (op.startsWith("pes."))
			return permitSemaphore(actor, op.substring(4), a);
		if (op.startsWith("latch."))
			return latch(actor, op.substring(6), a);
		/* "<kind>.<op>": the same on another kind of lock (see lock()) */
		if (op.contains("."))
		{
			String kind = op.substring(0, op.indexOf('.'));
			RLock l = lock(actor, kind, a[0]);

			switch (op.substring(op.indexOf('.') + 1))
			{
				case "lock":
					if (a.length > 1)
						l.lock(Long.parseLong(a[1]), TimeUnit.MILLISECONDS);
					else
						l.lock();
					return "done";
				case "trylock":
					if (a.length > 2)
						return l.tryLock(Long.parseLong(a[1]), Long.parseLong(a[2]),
										 TimeUnit.MILLISECONDS);
					return l.tryLock(Long.parseLong(a[1]), TimeUnit.MILLISECONDS);
				case "unlock":
					l.unlock();
					return "done";
				case "islocked":
					return l.isLocked();
				case "held":
					return l.isHeldByCurrentThread();
				case "holdcount":
					return l.getHoldCount();
				case "forceunlock":
					return l.forceUnlock();
				default:
					throw new IllegalArgumentException("unknown order " + op);
			}
		}
		switch (op)
		{
			case "lock":
				if (a.length > 1)
					lock(actor, a[0]).lock(Long.parseLong(a[1]), TimeUnit.MILLISECONDS);
				else
					lock(actor, a[0]).lock();
				return "done";
			case "trylock":
				if (a.length > 2)
					return lock(actor, a[0]).tryLock(Long.parseLong(a[1]),
													 Long.parseLong(a[2]),
													 TimeUnit.MILLISECONDS);
				return lock(actor, a[0]).tryLock(Long.parseLong(a[1]),
												 TimeUnit.MILLISECONDS);
			case "unlock":
				lock(actor, a[0]).unlock();
				return "done";
			case "forceunlock":
				return lock(actor, a[0]).forceUnlock();
			case "islocked":
				return lock(actor, a[0]).isLocked();
			case "held":
				return lock(actor, a[0]).isHeldByCurrentThread();
			case "holdcount":
				return lock(actor, a[0]).getHoldCount();
			case "ttl":
				return lock(actor, a[0]).remainTimeToLive();
			case "fencedlock":
				return fenced(actor, a[0]).lockAndGetToken();
			case "fencedunlock":
				fenced(actor, a[0]).unlock();
				return "done";
			case "token":
				return fenced(actor, a[0]).getToken();
			case "id":
				return client(actor).getId();
			case "owner":
				/* the hash field this thread's holds have */
				return client(actor).getId() + ":" + Thread.currentThread().getId();
			case "sleep":
				Thread.sleep(Long.parseLong(a[0]));
				return "done";
			case "rwstress":
				return rwstress(actor, a[0], Integer.parseInt(a[1]),
								Long.parseLong(a[2]));
			case "stress":
				return stress(actor, a[0], Integer.parseInt(a[1]),
							  Integer.parseInt(a[2]));
			case "contend":
				return contend(actor, a[0], Integer.parseInt(a[1]),
							   Long.parseLong(a[2]), Long.parseLong(a[3]));
			case "semstress":
				return semstress(actor, a[0], Integer.parseInt(a[1]),
								 Long.parseLong(a[2]), Long.parseLong(a[3]));
			default:
				throw new IllegalArgumentException("unknown order " + op);
		}
	}

	/* The wall clock in epoch microseconds, as Orders stamps its answers */
	private static long epochMicros()
	{
		java.time.Instant t = java.time.Instant.now();

		return t.getEpochSecond() * 1_000_000L + t.getNano() / 1000;
	}

	/*
	 * threads threads of the actor's client share the permit-expirable
	 * semaphore key for ms milliseconds: each loops over taking one permit
	 * (with a lease of leaseMs, none if 0 or less), holding it 0 to 5 ms
	 * and releasing it, and records the interval it held it.
	 *
	 * An interval begins when tryAcquire has returned and ends before
	 * release is sent, both on the wall clock, so it lies inside the time
	 * Redis counted the permit as taken: intervals recorded here and by
	 * SQL sessions on the same host that overlap more than the permits
	 * allow prove that more were handed out.
	 *
	 * A thread waits at most until 10 s past the end for a permit; a wait
	 * that runs out counts as a timeout and ends the thread.
	 *
	 * Answers "<intervals> <timeouts> <base> <list>": base is the first
	 * interval's start in epoch microseconds, the list "<start>+<length>"
	 * per interval, comma separated, both in microseconds, start counted
	 * from base ("-" when there is none).
	 */
	private Object semstress(String actor, String key, int threads, long ms,
							 long leaseMs)
		throws Exception
	{
		List<Thread> workers = new ArrayList<>();
		List<Throwable> failures = new ArrayList<>();
		List<long[]> intervals = new ArrayList<>();
		RedissonClient c = client(actor);
		long end = System.currentTimeMillis() + ms;
		java.util.concurrent.atomic.AtomicLong timeouts =
			new java.util.concurrent.atomic.AtomicLong();

		for (int t = 0; t < threads; t++)
		{
			final int seed = t;

			Thread w = new Thread(() -> {
				RPermitExpirableSemaphore sem = c.getPermitExpirableSemaphore(key);
				java.util.Random random = new java.util.Random(seed);
				List<long[]> mine = new ArrayList<>();

				try
				{
					long now;

					while ((now = System.currentTimeMillis()) < end)
					{
						long wait = end - now + 10000;
						String id = leaseMs > 0
							? sem.tryAcquire(wait, leaseMs, TimeUnit.MILLISECONDS)
							: sem.tryAcquire(wait, TimeUnit.MILLISECONDS);

						if (id == null)
						{
							timeouts.incrementAndGet();
							break;
						}
						long s = epochMicros();

						Thread.sleep(random.nextInt(6));
						mine.add(new long[] {s, epochMicros()});
						sem.release(id);
					}
				}
				catch (Throwable e)
				{
					synchronized (failures)
					{
						failures.add(e);
					}
				}
				synchronized (intervals)
				{
					intervals.addAll(mine);
				}
			});
			workers.add(w);
			w.start();
		}
		for (Thread w : workers)
			w.join();
		if (!failures.isEmpty())
			throw new RuntimeException(failures.get(0));
		if (intervals.isEmpty())
			return "0 " + timeouts.get() + " 0 -";
		intervals.sort((x, y) -> Long.compare(x[0], y[0]));

		long base = intervals.get(0)[0];
		StringBuilder list = new StringBuilder();

		for (long[] i : intervals)
		{
			if (list.length() > 0)
				list.append(',');
			list.append(i[0] - base).append('+').append(i[1] - i[0]);
		}
		return intervals.size() + " " + timeouts.get() + " " + base + " " + list;
	}

	/*
	 * A critical section on the counter row named key, committed on db:
	 * read it, write it back plus one, record the section in "spans".
	 */
	private static final class Section
	{
		private final PreparedStatement read;
		private final PreparedStatement write;
		private final PreparedStatement span;
		private final Connection db;

		Section(Connection db) throws Exception
		{
			this.db = db;
			db.setAutoCommit(false);
			read = db.prepareStatement(
				"SELECT n, clock_timestamp() FROM counters WHERE k = ?");
			write = db.prepareStatement(
				"UPDATE counters SET n = ? WHERE k = ?");
			span = db.prepareStatement(
				"INSERT INTO spans VALUES (?, ?, clock_timestamp())");
		}

		void run(String key) throws Exception
		{
			read.setString(1, key);
			try (ResultSet r = read.executeQuery())
			{
				r.next();
				long n = r.getLong(1);
				java.sql.Timestamp s = r.getTimestamp(2);

				write.setLong(1, n + 1);
				write.setString(2, key);
				write.executeUpdate();
				span.setString(1, key);
				span.setTimestamp(2, s);
				span.executeUpdate();
			}
			db.commit();
		}
	}

	/*
	 * threads threads of the actor's client compete for the lock on key
	 * for seconds: each loops over tryLock(waitMs), a section (Section)
	 * and unlock().  Returns "<sections> <timeouts> <longest wait in ms>":
	 * how many sections ran, how many tryLock calls gave up, and the
	 * longest any tryLock took.
	 */
	private Object contend(String actor, String key, int threads,
						   long seconds, long waitMs)
		throws Exception
	{
		List<Thread> workers = new ArrayList<>();
		List<Throwable> failures = new ArrayList<>();
		RedissonClient c = client(actor);
		long end = System.nanoTime() + seconds * 1_000_000_000L;
		java.util.concurrent.atomic.AtomicLong sections =
			new java.util.concurrent.atomic.AtomicLong();
		java.util.concurrent.atomic.AtomicLong timeouts =
			new java.util.concurrent.atomic.AtomicLong();
		java.util.concurrent.atomic.AtomicLong longest =
			new java.util.concurrent.atomic.AtomicLong();

		for (int t = 0; t < threads; t++)
		{
			Thread w = new Thread(() -> {
				RLock l = c.getLock(key);

				try (Connection db = DriverManager.getConnection(jdbcUrl))
				{
					Section section = new Section(db);

					while (System.nanoTime() < end)
					{
						long t0 = System.nanoTime();
						boolean got = l.tryLock(waitMs, TimeUnit.MILLISECONDS);

						longest.accumulateAndGet(
							(System.nanoTime() - t0) / 1_000_000, Math::max);
						if (!got)
						{
							timeouts.incrementAndGet();
							continue;
						}
						try
						{
							section.run(key);
							sections.incrementAndGet();
						}
						finally
						{
							l.unlock();
						}
					}
				}
				catch (Throwable e)
				{
					synchronized (failures)
					{
						failures.add(e);
					}
				}
			});
			workers.add(w);
			w.start();
		}
		for (Thread w : workers)
			w.join();
		if (!failures.isEmpty())
			throw new RuntimeException(failures.get(0));
		return sections.get() + " " + timeouts.get() + " " + longest.get();
	}

	/*
	 * threads threads of the actor's client share the read-write lock of
	 * key for seconds, with the row key of "rwdata" (a, b): one section in
	 * four a writer's, under writeLock(), which adds 1 to a and then to b
	 * in two statements committed apart; the others a reader's, under
	 * readLock(), which reads both and records the row in "rwtorn" if they
	 * differ (a write half done).  Each section's span goes to "rwspans"
	 * with "w" or "r".  Returns "<writes> <reads>".
	 */
	private Object rwstress(String actor, String key, int threads, long seconds)
		throws Exception
	{
		List<Thread> workers = new ArrayList<>();
		List<Throwable> failures = new ArrayList<>();
		RedissonClient c = client(actor);
		long end = System.nanoTime() + seconds * 1_000_000_000L;
		java.util.concurrent.atomic.AtomicLong writes =
			new java.util.concurrent.atomic.AtomicLong();
		java.util.concurrent.atomic.AtomicLong reads =
			new java.util.concurrent.atomic.AtomicLong();

		for (int t = 0; t < threads; t++)
		{
			final int seed = t;

			Thread w = new Thread(() -> {
				org.redisson.api.RReadWriteLock rw = c.getReadWriteLock(key);
				java.util.Random random = new java.util.Random(seed);

				try (Connection db = DriverManager.getConnection(jdbcUrl))
				{
					PreparedStatement now = db.prepareStatement(
						"SELECT clock_timestamp()");
					PreparedStatement incA = db.prepareStatement(
						"UPDATE rwdata SET a = a + 1 WHERE k = ?");
					PreparedStatement incB = db.prepareStatement(
						"UPDATE rwdata SET b = b + 1 WHERE k = ?");
					PreparedStatement look = db.prepareStatement(
						"INSERT INTO rwtorn SELECT k, a, b FROM rwdata WHERE k = ? AND a <> b");
					PreparedStatement span = db.prepareStatement(
						"INSERT INTO rwspans VALUES (?, ?, ?, clock_timestamp(), 'java')");

					db.setAutoCommit(true);
					while (System.nanoTime() < end)
					{
						boolean writer = random.nextInt(4) == 0;
						RLock l = writer ? rw.writeLock() : rw.readLock();

						l.lock();
						try
						{
							java.sql.Timestamp s;

							try (ResultSet r = now.executeQuery())
							{
								r.next();
								s = r.getTimestamp(1);
							}
							if (writer)
							{
								incA.setString(1, key);
								incA.executeUpdate();
								incB.setString(1, key);
								incB.executeUpdate();
								writes.incrementAndGet();
							}
							else
							{
								look.setString(1, key);
								look.executeUpdate();
								reads.incrementAndGet();
							}
							span.setString(1, key);
							span.setString(2, writer ? "w" : "r");
							span.setTimestamp(3, s);
							span.executeUpdate();
						}
						finally
						{
							l.unlock();
						}
					}
				}
				catch (Throwable e)
				{
					synchronized (failures)
					{
						failures.add(e);
					}
				}
			});
			workers.add(w);
			w.start();
		}
		for (Thread w : workers)
			w.join();
		if (!failures.isEmpty())
			throw new RuntimeException(failures.get(0));
		return writes.get() + " " + reads.get();
	}

	/*
	 * threads threads of the actor's client each do iterations times, under
	 * the Redisson lock on key and committed before the unlock: read the
	 * counter row named key, write it back plus one, and record the span of
	 * the critical section in "spans".  Returns how many sections ran.
	 */
	private Object stress(String actor, String key, int threads, int iterations)
		throws Exception
	{
		List<Thread> workers = new ArrayList<>();
		List<Throwable> failures = new ArrayList<>();
		RedissonClient c = client(actor);

		for (int t = 0; t < threads; t++)
		{
			Thread w = new Thread(() -> {
				RLock l = c.getLock(key);

				try (Connection db = DriverManager.getConnection(jdbcUrl))
				{
					Section section = new Section(db);

					for (int i = 0; i < iterations; i++)
					{
						l.lock();
						try
						{
							section.run(key);
						}
						finally
						{
							l.unlock();
						}
					}
				}
				catch (Throwable e)
				{
					synchronized (failures)
					{
						failures.add(e);
					}
				}
			});
			workers.add(w);
			w.start();
		}
		for (Thread w : workers)
			w.join();
		if (!failures.isEmpty())
			throw new RuntimeException(failures.get(0));
		return threads * iterations;
	}
}
