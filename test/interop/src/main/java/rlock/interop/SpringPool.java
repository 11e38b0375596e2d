/*
 * SpringPool: a Java service calling rlock through a HikariCP pool and
 * Spring's JDBC support, for test 050: what a pool and Spring make of
 * rlock's errors (doc/sql.md, "Errors").
 *
 * It speaks the line protocol of Orders.  A failed order is answered
 *
 *     <id> err <start> <end> <exception class> <SQLSTATE> <message>
 *
 * with the SQLSTATE of the first SQLException among the exception's
 * causes ("-" if none).  The orders (actors as in Orders; "n" below is the
 * pool's size):
 *
 *   pids             the backend pids of the pool's n connections, taken
 *                    out of the pool all at once, sorted, comma separated
 *   pool             HikariCP's counts: total=<t> active=<a> idle=<i>
 *   fan <call> <k>   n transactions at once, each on a connection of its
 *                    own (they wait for each other before the call), each
 *                    a call through JdbcTemplate on key <k>-<i>: "try"
 *                    (rlock_try), "lock" (rlock_lock), "hold"
 *                    (rlock_lock, then wait for "go" before the commit),
 *                    "locktimeout" or "statementtimeout" (rlock_lock
 *                    after SET LOCAL lock_timeout or statement_timeout =
 *                    200 ms).
 *                    Answers "<pid>:<outcome>" per transaction, by pid:
 *                    the call's value, "committed", or <exception simple
 *                    name>/<SQLSTATE>
 *   go               lets the transactions of "hold" and a paused "add"
 *                    go on
 *   bind <how> <k>   rlock_try(k, wait) with the wait bound as a String
 *                    ("string"), as a String cast to interval ("cast"),
 *                    as a PGInterval ("pginterval")
 *   add <k> <account> <amount> [pause]
 *                    doc/examples/SpringRetry.java's Payments.addToBalance,
 *                    with a RetryListener that records every failed
 *                    attempt and, with "pause", waits after each for "go".
 *                    Answers attempts=<n> failed=<outcomes> and
 *                    balance=<new balance> or error=<outcome>
 *   failed           waits for the next failed attempt of a paused "add"
 *                    and answers its outcome
 *
 * Options: --jdbc url, --pool n (4).  The pool opens its n connections at
 * start and keeps them (minimumIdle = maximumPoolSize).
 *
 * Copyright (c) 2026, rlock developers
 */
package rlock.interop;

import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;
import java.util.TreeMap;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

import javax.sql.DataSource;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import com.zaxxer.hikari.HikariPoolMXBean;
import org.postgresql.util.PGInterval;
import org.springframework.context.annotation.AnnotationConfigApplicationContext;
import org.springframework.core.SpringVersion;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.retry.RetryCallback;
import org.springframework.retry.RetryContext;
import org.springframework.retry.RetryListener;
import org.springframework.retry.support.RetryTemplate;
import org.springframework.transaction.PlatformTransactionManager;
import org.springframework.transaction.support.TransactionTemplate;

import rlock.examples.SpringRetry;

public final class SpringPool
{
	/* how long a transaction or a test waits for the other side */
	private static final long PATIENCE_S = 30;

	private final int size;
	private final HikariDataSource pool;
	private final AnnotationConfigApplicationContext spring;
	private final JdbcTemplate jdbc;
	private final TransactionTemplate tx;
	private final SpringRetry.Payments payments;

	/* opened by "go"; then a new one for the next wait */
	private CountDownLatch gate = new CountDownLatch(1);
	/* the failed attempts of the "add" running on this thread */
	private final ThreadLocal<List<String>> attempts = new ThreadLocal<>();
	private final ThreadLocal<Boolean> pausing = ThreadLocal.withInitial(() -> false);
	private final BlockingQueue<String> failures = new LinkedBlockingQueue<>();

	private SpringPool(String jdbcUrl, int size)
	{
		HikariConfig hc = new HikariConfig();

		hc.setJdbcUrl(jdbcUrl);
		hc.setPoolName("rlock-spring");
		hc.setMaximumPoolSize(size);
		hc.setMinimumIdle(size);
		hc.setConnectionTimeout(PATIENCE_S * 1000);
		hc.addDataSourceProperty("ApplicationName", "rlock-spring");
		this.size = size;
		this.pool = new HikariDataSource(hc);

		spring = new AnnotationConfigApplicationContext();
		spring.registerBean(DataSource.class, () -> pool);
		spring.register(SpringRetry.Config.class);
		spring.refresh();
		jdbc = spring.getBean(JdbcTemplate.class);
		tx = new TransactionTemplate(spring.getBean(PlatformTransactionManager.class));
		payments = spring.getBean(SpringRetry.Payments.class);
		spring.getBean(RetryTemplate.class).registerListener(new Recorder());
	}

	public static void main(String[] args) throws Exception
	{
		String jdbc = null;
		int size = 4;

		for (int i = 0; i + 1 < args.length; i += 2)
		{
			switch (args[i])
			{
				case "--jdbc" -> jdbc = args[i + 1];
				case "--pool" -> size = Integer.parseInt(args[i + 1]);
				default -> throw new IllegalArgumentException("unknown option " + args[i]);
			}
		}
		SpringPool s = new SpringPool(jdbc, size);

		Orders.serve("spring-" + SpringVersion.getVersion() + ",hikaricp-" +
					 Orders.jarVersion(HikariConfig.class, "com.zaxxer/HikariCP"),
					 s::perform, SpringPool::describe);
		s.spring.close();
		System.exit(0);
	}

	/* The first SQLException among e and its causes, or null */
	private static SQLException sqlCause(Throwable e)
	{
		for (Throwable c = e; c != null; c = c.getCause())
		{
			if (c instanceof SQLException s)
				return s;
		}
		return null;
	}

	private static String sqlState(Throwable e)
	{
		SQLException s = sqlCause(e);

		return s == null || s.getSQLState() == null ? "-" : s.getSQLState();
	}

	/* An answer's failure: class, SQLSTATE, message */
	private static String describe(Throwable e)
	{
		return e.getClass().getName() + " " + sqlState(e) + " " +
			Orders.oneLine(e.getMessage());
	}

	/* A failure in a list of outcomes: simple class name/SQLSTATE */
	private static String outcome(Throwable e)
	{
		return e.getClass().getSimpleName() + "/" + sqlState(e);
	}

	private Object perform(String actor, String op, String[] a) throws Exception
	{
		switch (op)
		{
			case "pids":
				return pids();
			case "pool":
				HikariPoolMXBean m = pool.getHikariPoolMXBean();

				return "total=" + m.getTotalConnections() + " active=" +
					m.getActiveConnections() + " idle=" + m.getIdleConnections();
			case "fan":
				return fan(a[0], a[1]);
			case "go":
				open();
				return "done";
			case "bind":
				return bind(a[0], a[1]);
			case "add":
				return add(a[0], Long.parseLong(a[1]), Long.parseLong(a[2]),
						   a.length > 3 && a[3].equals("pause"));
			case "failed":
				String f = failures.poll(PATIENCE_S, TimeUnit.SECONDS);

				if (f == null)
					throw new IllegalStateException("no attempt failed");
				return f;
			default:
				throw new IllegalArgumentException("unknown order " + op);
		}
	}

	/* Every connection of the pool at once: their backend pids */
	private String pids() throws SQLException
	{
		List<Connection> held = new ArrayList<>();
		TreeMap<Integer, Boolean> pids = new TreeMap<>();

		try
		{
			for (int i = 0; i < size; i++)
			{
				Connection c = pool.getConnection();

				held.add(c);
				try (Statement s = c.createStatement();
					 ResultSet r = s.executeQuery("SELECT pg_backend_pid()"))
				{
					r.next();
					pids.put(r.getInt(1), true);
				}
			}
		}
		finally
		{
			for (Connection c : held)
				c.close();
		}
		return String.join(",", pids.keySet().stream().map(String::valueOf).toList());
	}

	private synchronized CountDownLatch currentGate()
	{
		return gate;
	}

	private synchronized void open()
	{
		gate.countDown();
		gate = new CountDownLatch(1);
	}

	private static void await(CountDownLatch g)
	{
		try
		{
			if (g.await(PATIENCE_S, TimeUnit.SECONDS))
				return;
		}
		catch (InterruptedException e)
		{
			Thread.currentThread().interrupt();
		}
		throw new IllegalStateException("no \"go\" came");
	}

	/*
	 * "size" transactions at once, each on its own connection: a barrier
	 * after the first statement keeps every connection taken until all
	 * are, so each of the pool's connections makes the call.
	 */
	private String fan(String call, String key) throws Exception
	{
		ExecutorService threads = Executors.newFixedThreadPool(size);
		CyclicBarrier together = new CyclicBarrier(size);
		CountDownLatch g = currentGate();
		List<Future<String>> results = new ArrayList<>();
		TreeMap<Integer, String> byPid = new TreeMap<>();

		for (int i = 0; i < size; i++)
		{
			String k = key + "-" + i;

			results.add(threads.submit(() -> {
				int[] pid = new int[1];

				try
				{
					Object value = tx.execute(status -> {
						pid[0] = jdbc.queryForObject("SELECT pg_backend_pid()", Integer.class);
						return call(call, k, together, g);
					});

					return pid[0] + ":" + value;
				}
				catch (RuntimeException e)
				{
					return pid[0] + ":" + outcome(e);
				}
			}));
		}
		threads.shutdown();
		for (Future<String> r : results)
		{
			String s = r.get(PATIENCE_S * 2, TimeUnit.SECONDS);

			byPid.put(Integer.parseInt(s.substring(0, s.indexOf(':'))), s);
		}
		return String.join(" ", byPid.values());
	}

	/* One rlock call of "fan", in a transaction, once all are in theirs */
	private Object call(String call, String key, CyclicBarrier together,
						CountDownLatch g)
	{
		try
		{
			together.await(PATIENCE_S, TimeUnit.SECONDS);
		}
		catch (Exception e)
		{
			throw new IllegalStateException("the transactions did not meet", e);
		}
		switch (call)
		{
			case "try":
				return jdbc.queryForObject("SELECT rlock_try(?, ?::interval)",
										   Boolean.class, key, "0");
			case "lock":
				return jdbc.queryForObject("SELECT 'locked' FROM rlock_lock(?)",
										   String.class, key);
			case "hold":
				jdbc.queryForObject("SELECT 'locked' FROM rlock_lock(?)",
									String.class, key);
				await(g);
				return "committed";
			case "locktimeout":
				jdbc.execute("SET LOCAL lock_timeout = '200ms'");
				return jdbc.queryForObject("SELECT 'locked' FROM rlock_lock(?)",
										   String.class, key);
			case "statementtimeout":
				jdbc.execute("SET LOCAL statement_timeout = '200ms'");
				return jdbc.queryForObject("SELECT 'locked' FROM rlock_lock(?)",
										   String.class, key);
			default:
				throw new IllegalArgumentException("unknown call " + call);
		}
	}

	/* rlock_try with its wait bound three ways */
	private Object bind(String how, String key)
	{
		return tx.execute(status -> switch (how)
			{
				case "string" -> jdbc.queryForObject(
					"SELECT rlock_try(?, ?)", Boolean.class, key, "1 s");
				case "cast" -> jdbc.queryForObject(
					"SELECT rlock_try(?, ?::interval)", Boolean.class, key, "1 s");
				case "pginterval" -> jdbc.queryForObject(
					"SELECT rlock_try(?, ?)", Boolean.class, key,
					new PGInterval(0, 0, 0, 0, 0, 1.0));
				default -> throw new IllegalArgumentException("unknown binding " + how);
			});
	}

	/* The example's retried transaction, with its failed attempts */
	private String add(String key, long account, long amount, boolean pause)
	{
		List<String> failed = new ArrayList<>();

		attempts.set(failed);
		pausing.set(pause);
		try
		{
			long balance = payments.addToBalance(key, account, amount);

			return "attempts=" + (failed.size() + 1) + " failed=" +
				String.join(",", failed) + " balance=" + balance;
		}
		catch (RuntimeException e)
		{
			return "attempts=" + failed.size() + " failed=" +
				String.join(",", failed) + " error=" + outcome(e);
		}
		finally
		{
			attempts.remove();
			pausing.remove();
		}
	}

	/* Records each failed attempt of "add"; pauses after it if asked */
	private final class Recorder implements RetryListener
	{
		@Override
		public <T, E extends Throwable> void onError(RetryContext context,
													 RetryCallback<T, E> callback,
													 Throwable e)
		{
			List<String> failed = attempts.get();

			if (failed == null)
				return;
			failed.add(outcome(e));
			if (!pausing.get())
				return;
			CountDownLatch g = currentGate();

			failures.add(outcome(e));
			await(g);
		}
	}
}
