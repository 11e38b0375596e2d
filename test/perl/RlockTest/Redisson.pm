
=pod

=head1 NAME

RlockTest::Redisson - a Java service using the real Redisson, or a Node.js
one using node-redisson, or a Java service calling rlock through HikariCP
and Spring, driven line by line from a test (test/interop/)

=head1 SYNOPSIS

  my $java = RlockTest::Redisson->start($redis, version => '3.52.0');
  $java->call('a.1', 'lock', 'k');               # thread 1 of client a
  my $id = $java->send('b.1', 'trylock', 'k', 5000);
  ...                                            # meanwhile, in SQL
  my $r = $java->result($id, 10);                # {ok, value, at}
  $java->stop;

  my $node = RlockTest::Redisson->start_node($redis);   # node-redisson
  my $spring = RlockTest::Redisson->start_spring($jdbc_url, pool => 4);

=cut

package RlockTest::Redisson;

use strict;
use warnings;

use Cwd ();
use File::Basename ();
use File::Copy ();
use File::Path ();
use IPC::Run ();
use Test::More;
use Time::HiRes qw(time);

my $interop = Cwd::abs_path(File::Basename::dirname(__FILE__) . '/../../interop');

# The Redisson versions every interoperability case runs against: the
# newest release, the newest 3.x, and the line before the batched
# watchdog (3.44), the script cache default (3.46) and the unlock latch
# (3.24).
our @VERSIONS = ('4.7.0', '3.52.0', '3.23.5');

# Build the drivers for a Redisson version, and for a Spring Framework
# version other than the one pom.xml names if $spring is given (once per
# run: the classes and the jars they need go to
# test/out/interop/redisson-<version>[-spring-<version>]), and return
# their class path.
sub build
{
	my ($version, $spring) = @_;
	my $dir = Cwd::abs_path("$interop/..") . "/out/interop/redisson-$version"
	  . (defined $spring ? "-spring-$spring" : '');
	my $jar = "$dir/rlock-interop-1.0.jar";
	unless (-e $jar)
	{
		my $log = '';
		my $ok = IPC::Run::run(
			[ 'mvn', '-q', '-B', '-f', "$interop/pom.xml",
			  "-Dredisson.version=$version",
			  (defined $spring ? "-Dspring.version=$spring" : ()),
			  "-Dout.dir=$dir", 'package' ],
			'<', \undef, '>&', \$log);
		die "building the interop drivers for Redisson $version"
		  . (defined $spring ? " and Spring $spring" : '') . " failed:\n$log"
		  unless $ok && -e $jar;
	}
	return "$jar:$dir/lib/*";
}

# Start a driver for Redisson $opt{version} (default: the newest) talking
# to $redis; options: codec ('default' or 'string'), watchdog (ms), jdbc.
sub start
{
	my ($class, $redis, %opt) = @_;
	my $version = $opt{version} // $VERSIONS[0];
	my @cmd = (
		'java', '-cp', build($version), 'rlock.interop.Driver',
		'--redis', 'redis://127.0.0.1:' . $redis->port,
		'--codec', $opt{codec} // 'default',
		'--watchdog', $opt{watchdog} // 30000);
	push @cmd, '--jdbc', $opt{jdbc} if $opt{jdbc};
	return $class->_spawn(@cmd);
}

# Start a driver whose clients find the primary through the Sentinels of
# deployment $dep (RlockTest::Sentinel), as useSentinelServers does;
# options as for start, and data_password and sentinel_password.
sub start_sentinel
{
	my ($class, $dep, %opt) = @_;
	my $version = $opt{version} // $VERSIONS[0];
	return $class->_spawn(
		'java', '-cp', build($version), 'rlock.interop.Driver',
		'--redis',
		join(',', map { "redis://127.0.0.1:$_" } $dep->sentinel_ports),
		'--sentinel', $dep->master_name,
		'--codec', $opt{codec} // 'default',
		'--watchdog', $opt{watchdog} // 30000,
		(defined $opt{data_password}
			? ('--password', $opt{data_password}) : ()),
		(defined $opt{sentinel_password}
			? ('--sentinel-password', $opt{sentinel_password}) : ()));
}

# Start test/interop's SentinelLoad: Java threads guarding one Redisson
# lock through the Sentinels of deployment $dep, each critical section
# written to table "sections" of the database at JDBC URL $jdbc.
# Options: version, data_password, sentinel_password, fenced (true: an
# RFencedLock), scan_interval (Redisson's scanInterval, ms; its default
# when not given) and lease (ms; the watchdog when not given).  Its one
# order: run <key> <threads> <ms>.
sub start_sentinel_load
{
	my ($class, $dep, $jdbc, %opt) = @_;
	my %flag = (
		data_password => '--password',
		sentinel_password => '--sentinel-password',
		scan_interval => '--scan-interval',
		lease => '--lease');
	return $class->_spawn(
		'java', '-cp', build($opt{version} // $VERSIONS[0]),
		'rlock.interop.SentinelLoad',
		'--sentinels',
		join(',', map { "redis://127.0.0.1:$_" } $dep->sentinel_ports),
		'--master', $dep->master_name,
		'--jdbc', $jdbc,
		($opt{fenced} ? ('--fenced', 'yes') : ()),
		map { defined $opt{$_} ? ($flag{$_}, $opt{$_}) : () } sort keys %flag);
}

# Start a driver whose clients use the Redis Cluster $cluster
# (RlockTest::Cluster), as useClusterServers does; options as for start,
# and sharded => 'off' for shardedSubscriptionMode OFF (3.29 and later).
sub start_cluster
{
	my ($class, $cluster, %opt) = @_;
	my $version = $opt{version} // $VERSIONS[0];
	return $class->_spawn(
		'java', '-cp', build($version), 'rlock.interop.Driver',
		'--redis', join(',', map { 'redis://127.0.0.1:' . $_->port } $cluster->primaries),
		'--cluster', 'yes',
		'--codec', $opt{codec} // 'default',
		'--watchdog', $opt{watchdog} // 30000,
		(defined $opt{sharded} ? ('--sharded', $opt{sharded}) : ()));
}

# Start test/interop's SpringPool: a HikariCP pool of $opt{pool} (4)
# connections to the JDBC URL $jdbc, used through Spring's JdbcTemplate
# and transactions; $opt{spring}: a Spring Framework version other than
# pom.xml's.  Its failed orders say the SQLSTATE first in their message.
sub start_spring
{
	my ($class, $jdbc, %opt) = @_;
	return $class->_spawn(
		'java', '-cp', build($VERSIONS[0], $opt{spring}),
		'rlock.interop.SpringPool', '--jdbc', $jdbc,
		'--pool', $opt{pool} // 4);
}

# Install node-redisson (test/interop/node: the versions its lock file
# pins) into test/out/interop/node, once per run, and return the driver.
sub build_node
{
	my $dir = Cwd::abs_path("$interop/..") . '/out/interop/node';
	File::Path::make_path($dir);
	# the driver may change between runs, the packages only with the lock
	File::Copy::copy("$interop/node/driver.js", "$dir/driver.js")
	  or die "driver.js: $!";
	unless (-e "$dir/node_modules/node-redisson/package.json")
	{
		for my $f ('package.json', 'package-lock.json')
		{
			File::Copy::copy("$interop/node/$f", "$dir/$f") or die "$f: $!";
		}
		my $log = '';
		my $ok = IPC::Run::run(
			[ 'npm', 'ci', '--prefix', $dir, '--no-audit', '--no-fund' ],
			'<', \undef, '>&', \$log);
		die "installing node-redisson failed:\n$log"
		  unless $ok && -e "$dir/node_modules/node-redisson/package.json";
	}
	return "$dir/driver.js";
}

# Start the driver of node-redisson, a second Redisson-compatible client,
# talking to $redis; options: watchdog (ms).  It takes the orders lock,
# trylock, unlock, islocked, forceunlock, owner and listeners.
sub start_node
{
	my ($class, $redis, %opt) = @_;
	return $class->_spawn('node', build_node(),
		'--redis-port', $redis->port, '--watchdog', $opt{watchdog} // 30000);
}

sub _spawn
{
	my ($class, @cmd) = @_;
	my $self = bless {
		in => '',
		out => '',
		err => '',
		next => 1,
		done => {},
	}, $class;
	$self->{h} = IPC::Run::start(\@cmd, '<', \$self->{in}, '>', \$self->{out},
		'2>', \$self->{err});
	my $deadline = time + 60;
	while (1)
	{
		if ($self->{out} =~ s/^ready (\S+)\n//)
		{
			$self->{running} = $1;
			last;
		}
		die "the interop driver did not start: $self->{err}" if time > $deadline;
		$self->{h}->pump_nb;
		select(undef, undef, undef, 0.05);
	}
	return $self;
}

# The client's version as the driver reports it: Redisson's, as its jar
# says, node-redisson's, or Spring's and HikariCP's.
sub version { $_[0]{running} }

# What a driver line carries: bytes outside printable ASCII, and "%",
# as %XX.
sub _escape
{
	my ($s) = @_;
	utf8::encode($s);
	$s =~ s/([^\x21-\x24\x26-\x7e])/sprintf('%%%02X', ord($1))/ge;
	return $s;
}

# Hand an order to an actor ("client.thread"); returns its id at once.
sub send
{
	my ($self, $actor, $op, @args) = @_;
	my $id = $self->{next}++;
	$self->{in} .= join(' ', $id, $actor, $op, map { _escape($_) } @args) . "\n";
	$self->{h}->pump_nb while length $self->{in};
	return $id;
}

sub _collect
{
	my ($self) = @_;
	$self->{h}->pump_nb;
	while ($self->{out} =~ s/^(\d+) (ok|err) (.*)\n//)
	{
		my ($id, $status, $rest) = ($1, $2, $3);
		my %r = (ok => $status eq 'ok');
		if ($r{ok})
		{
			@r{qw(start at value)} = $rest =~ /^(\d+) (\d+) (.*)$/;
		}
		else
		{
			@r{qw(start at error message)} = $rest =~ /^(\d+) (\d+) (\S+) ?(.*)$/;
		}
		$r{start} /= 1e6;
		$r{at} /= 1e6;
		$self->{done}{$id} = \%r;
	}
}

# Whether order $id has ended (without waiting).
sub ended
{
	my ($self, $id) = @_;
	$self->_collect;
	return exists $self->{done}{$id};
}

# Wait at most $seconds for order $id to end; returns its outcome
# ({ok => 1, value, at} or {ok => 0, error, message, at}, at in epoch
# seconds), or undef if it did not end in time.
sub result
{
	my ($self, $id, $seconds) = @_;
	my $deadline = time + ($seconds // 30);
	until (exists $self->{done}{$id})
	{
		return undef if time > $deadline;
		$self->_collect;
		select(undef, undef, undef, 0.01) unless exists $self->{done}{$id};
	}
	return delete $self->{done}{$id};
}

# An order and its value: dies if it failed or did not end within 30 s.
sub call
{
	my ($self, $actor, $op, @args) = @_;
	my $r = $self->result($self->send($actor, $op, @args), 30);
	die "$actor $op @args: no answer within 30 s" unless $r;
	die "$actor $op @args: $r->{error}: $r->{message}" unless $r->{ok};
	return $r->{value};
}

# The answer of the driver's "semstress" order, unpacked: the number of
# intervals, of waits that ran out, and the intervals, [start, end] in
# epoch microseconds each, by start.
sub stress_intervals
{
	my ($value) = @_;
	my ($n, $timeouts, $base, $list) = split ' ', $value;
	die "not a semstress answer: $value" unless defined $list;
	my @iv;
	for (split /,/, $list eq '-' ? '' : $list)
	{
		my ($s, $len) = /^(\d+)\+(\d+)$/ or die "bad interval $_";
		push @iv, [ $base + $s, $base + $s + $len ];
	}
	die "semstress said $n intervals, sent " . scalar(@iv) unless $n == @iv;
	return ($n, $timeouts, \@iv);
}

sub stop
{
	my ($self) = @_;
	return unless $self->{h};
	$self->{in} .= "0 - quit\n";
	eval {
		$self->{h}->pump_nb while length $self->{in};
		$self->{h}->finish;
	};
	$self->{h}->kill_kill if $@;
	delete $self->{h};
}

sub DESTROY { $_[0]->stop }

1;
