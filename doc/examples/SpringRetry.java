/*
 * Retry a locked read-modify-write transaction from Spring: JdbcTemplate,
 * @Transactional and spring-retry's RetryTemplate (Spring Framework 6.2 or
 * 7.0, spring-retry 2.0, a pooled DataSource such as HikariCP).
 *
 * Accounts.addToBalance is one attempt: it takes the lock, reads, writes,
 * and commits as it returns; rlock's check before commit runs in that
 * commit.  Payments.addToBalance wraps it in the retry from outside, so
 * that every attempt is a transaction of its own: a retry inside the
 * @Transactional method would go on in a transaction already rolled back.
 *
 * What is retried is chosen by SQLSTATE, which does not depend on the
 * exception translator Spring uses (doc/sql.md, "Errors"):
 *
 *   40001  the lock was lost before the commit (its lease ran out, it was
 *          removed from Redis, Redis restarted); the commit was refused
 *          and nothing of the transaction is visible.  Spring raises
 *          CannotAcquireLockException, also for the commit, as
 *          JdbcTransactionManager translates it;
 *   40P01  a deadlock among PostgreSQL's own locks;
 *   55P03  lock_timeout ran out while rlock_lock() waited;
 *   58030  Redis could not be reached in time.  Spring raises
 *          DataAccessResourceFailureException, as for codes a new attempt
 *          does not cure (54000, a key too long): hence the SQLSTATE;
 *
 * and a lock still busy when rlock_try's wait ran out, which
 * addToBalance reports as a CannotAcquireLockException of its own.  Any
 * other error goes up at once.
 *
 * The wait is bound as text with a cast, "?::interval": a String bound
 * alone is a varchar, and PostgreSQL has no rlock_try(varchar, varchar)
 * (42883).  An org.postgresql.util.PGInterval needs no cast.
 *
 * test/t/050_spring_pool.pl runs this code (through test/interop's
 * SpringPool): a lock deleted from Redis before the commit, a busy lock,
 * Redis down for one attempt, a key too long.
 */
package rlock.examples;

import java.sql.SQLException;
import java.util.Set;

import javax.sql.DataSource;

import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.dao.CannotAcquireLockException;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.support.JdbcTransactionManager;
import org.springframework.retry.support.RetryTemplate;
import org.springframework.transaction.PlatformTransactionManager;
import org.springframework.transaction.annotation.EnableTransactionManagement;
import org.springframework.transaction.annotation.Transactional;

public final class SpringRetry
{
	private static final Set<String> RETRYABLE =
		Set.of("40001", "40P01", "55P03", "58030");

	private SpringRetry()
	{
	}

	/* The beans; the application provides the DataSource, a pool */
	@Configuration
	@EnableTransactionManagement
	public static class Config
	{
		@Bean
		public JdbcTemplate jdbcTemplate(DataSource dataSource)
		{
			return new JdbcTemplate(dataSource);
		}

		/*
		 * JdbcTransactionManager rather than DataSourceTransactionManager:
		 * it translates a failed commit as JdbcTemplate translates a
		 * statement (40001: CannotAcquireLockException), where the older
		 * one raises a TransactionSystemException.
		 */
		@Bean
		public PlatformTransactionManager transactionManager(DataSource dataSource)
		{
			return new JdbcTransactionManager(dataSource);
		}

		/* five attempts, pauses of 50 ms doubling up to 1 s, randomized */
		@Bean
		public RetryTemplate retryTemplate()
		{
			return RetryTemplate.builder()
				.maxAttempts(5)
				.exponentialBackoff(50, 2.0, 1000, true)
				.retryOn(SpringRetry::retryable)
				.build();
		}

		@Bean
		public Accounts accounts(JdbcTemplate jdbc)
		{
			return new Accounts(jdbc);
		}

		@Bean
		public Payments payments(Accounts accounts, RetryTemplate retry)
		{
			return new Payments(accounts, retry);
		}
	}

	/* Whether a new attempt of the whole transaction may succeed */
	public static boolean retryable(Throwable e)
	{
		if (e instanceof CannotAcquireLockException)
			return true;
		for (Throwable c = e; c != null; c = c.getCause())
		{
			if (c instanceof SQLException s)
				return RETRYABLE.contains(s.getSQLState());
		}
		return false;
	}

	/* One attempt, one transaction */
	public static class Accounts
	{
		private final JdbcTemplate jdbc;

		public Accounts(JdbcTemplate jdbc)
		{
			this.jdbc = jdbc;
		}

		@Transactional
		public long addToBalance(String key, long account, long amount)
		{
			Boolean taken = jdbc.queryForObject(
				"SELECT rlock_try(?, ?::interval)", Boolean.class, key, "1 s");

			if (!Boolean.TRUE.equals(taken))
				throw new CannotAcquireLockException("lock \"" + key + "\" is busy");
			long balance = jdbc.queryForObject(
				"SELECT balance FROM accounts WHERE id = ?", Long.class, account);

			jdbc.update("UPDATE accounts SET balance = ? WHERE id = ?",
						balance + amount, account);
			return balance + amount;
		}
	}

	/* The caller's side: the retry around the transaction */
	public static class Payments
	{
		private final Accounts accounts;
		private final RetryTemplate retry;

		public Payments(Accounts accounts, RetryTemplate retry)
		{
			this.accounts = accounts;
			this.retry = retry;
		}

		public long addToBalance(String key, long account, long amount)
		{
			return retry.execute(
				attempt -> accounts.addToBalance(key, account, amount));
		}
	}
}
